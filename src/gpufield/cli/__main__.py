import sys

from gpufield.cli import main

sys.exit(main())

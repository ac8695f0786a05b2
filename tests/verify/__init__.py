"""Tests of gpufield.verify (a package so module names cannot clash with other wings)."""

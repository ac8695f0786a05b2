"""Tests of gpufield.telemetry and gpufield.testing."""

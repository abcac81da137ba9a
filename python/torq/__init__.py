"""Torq NPU compiler and simulator on top of IREE."""

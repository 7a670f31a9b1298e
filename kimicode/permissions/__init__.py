"""The permission engine: one rule language, the shell parser and the path resolver behind every decision."""

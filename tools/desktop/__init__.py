"""The firmware on the desktop: python -m tools.desktop.demo | simulate."""

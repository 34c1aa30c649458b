"""Allow ``python -m provisioner``."""

from provisioner.cli import main

main()

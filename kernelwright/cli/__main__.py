"""`python -m kernelwright.cli` runs the `kernelwright` command."""

from kernelwright.cli.main import main

main()

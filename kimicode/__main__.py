"""`python -m kimicode` runs the command line."""

from kimicode.cli.entry import main

main()

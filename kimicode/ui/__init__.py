"""The interactive terminal: prompt_toolkit input, rich output, on the same Agent as headless runs.

Nothing here is imported by `import kimicode` or by the headless path; `kimicode` without `-p` in a
terminal calls `kimicode.ui.launch.run_interactive`.
"""

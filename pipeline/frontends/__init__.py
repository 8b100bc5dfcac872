"""What a person touches: the command line behind tasks.py, option checks, the console, `invoke
predict`, `invoke bench`.

The top layer: the only part of pipeline/ that imports the target table (`targets`), and only that.
"""

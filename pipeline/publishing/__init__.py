"""Output folders: atomic publishing of generations, the ledger of what the tool wrote, locks,
clean, the manifest, and the report with its pictures.

Knows folders, files and manifests, not how an artifact is built; uses `stages` for the golden set
and parity in the report.
"""

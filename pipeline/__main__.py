"""`python -m arrcoc_edge`: the `arrcoc-edge` command, for an environment whose scripts folder is not on PATH."""
from arrcoc_edge.frontends.commands import main

if __name__ == "__main__":
    main()

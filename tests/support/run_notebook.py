"""Executes a notebook on a real ipykernel with nbclient (tests of the IPython extension).

usage: run_notebook.py CELLS.json OUT.ipynb [TIMEOUT_S]
CELLS.json is a JSON list of cell sources; the executed notebook (outputs included) is written to OUT.ipynb.
Cell errors are kept as outputs (allow_errors): the tests look at them.
"""
import json
import os
import sys

import nbformat
from nbclient import NotebookClient


def main():
    cells_path, out_path = sys.argv[1], sys.argv[2]
    timeout = int(sys.argv[3]) if len(sys.argv) > 3 else 120
    with open(cells_path, encoding="utf-8") as f:
        sources = json.load(f)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(out_path))}})
    try:
        client.execute()
    finally:
        nbformat.write(nb, out_path)


if __name__ == "__main__":
    main()

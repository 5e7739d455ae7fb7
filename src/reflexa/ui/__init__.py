"""The web trace viewer (`reflexa ui`): runs, their steps, diffs, lessons, citations, usage, live runs, the
experience library and the governor's statistics, read from the trace store without writing to it.

Needs the `ui` extra (FastAPI, uvicorn, Jinja2): `pip install 'reflexa[ui]'`. Start it with `reflexa ui`, or
from Python with `reflexa.ui.server.serve(path)`; `reflexa.ui.app.create_app(path)` gives the ASGI app.
"""

"""The web UI's server: the JSON API of docs/ui-api.md and the built front end, over one store.

``create_app(home)`` gives the FastAPI application (tests drive it in-process); ``serve(home)``
runs it with uvicorn, as ``hyperscope ui`` does.
"""

from hyperscope.server.app import create_app
from hyperscope.server.serve import serve

__all__ = ["create_app", "serve"]

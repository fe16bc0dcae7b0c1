"""`skyhive dashboard`: a local web app over the state directory (docs/dashboard.md).

`watch.py` reads the pools' event logs incrementally, `views.py` shapes what the pages show, `app.py`
is the Starlette app (token, routes, live streams), `server.py` serves it with uvicorn on loopback.
Starlette and uvicorn are the `skyhive[dashboard]` extra: nothing else imports this package.
"""

"""Flask-Limiter guarding one route, its limit, strategy and storage from the environment,
with the rate-limit headers enabled as its documentation shows."""

import os

from flask import Flask, request
from flask_limiter import Limiter

app = Flask(__name__)
limiter = Limiter(
    key_func=lambda: request.headers.get("x-key", request.remote_addr),
    app=app,
    default_limits=[os.environ["LIMIT"]],
    storage_uri=os.environ["STORAGE_URI"],
    strategy=os.environ["STRATEGY"],
    headers_enabled=True,
)


@app.route("/")
def index():
    return "ok\n"


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ["PORT"]), threaded=True)

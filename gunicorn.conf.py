"""gunicorn settings every launch of the web server shares (Dockerfile, deploy/web.yaml,
docker-compose.yml, scripts/run.sh pass ``--config gunicorn.conf.py``; gunicorn also reads
this file by default from the working directory).

gunicorn answers a request line over ``limit_request_line`` bytes itself, with a 414 and an
HTML body, before Django (and the API's JSON error shape) runs. Its default, 4094, is short
enough that a long list of query parameters could reach it; 8190 is gunicorn's maximum and
twice what any API URL needs (docs/operations.md, "Request size limits"). Bodies are limited by
Django (``DATA_UPLOAD_MAX_MEMORY_SIZE``, a 413 in the JSON error shape under ``/api/``).
"""

limit_request_line = 8190

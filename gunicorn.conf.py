"""Gunicorn's settings for both planes (read from the working directory: the Procfile's and
the image's /app). Flags on the command line still win."""

# An idle client connection stays open longer than any client or balancer keeps one: the
# official SDKs reuse theirs for up to 5 s and cloud load balancers for 60 s. Gunicorn's 2 s
# default closes connections those clients are about to reuse, and a request sent into that
# close fails with "Server disconnected" before it reaches us.
keepalive = 75

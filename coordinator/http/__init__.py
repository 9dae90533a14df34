"""The HTTP/JSON edge of a node, and its web dashboard.

Served by aiohttp in the node's own event loop, beside the gRPC server, calling the
same servicers (``coordinator/service.py``) in-process: no gRPC loop-back. Bodies are
the proto's canonical JSON mapping, so every field is spelled as in the proto
(lowerCamelCase) and means what it means over gRPC.

- ``caller``: who is calling, resolved from the request's headers in one function
  (the owner today), and the servicer context that carries it;
- ``mapping``: a request's JSON body, path and query into the proto request, and a
  proto answer into JSON;
- ``errors``: the gRPC status of a failure as an HTTP status and a JSON body
  ``{"code", "message", "field"}``;
- ``routes``: the route table, one entry per operation, and its handlers;
- ``output``: a run's output as JSON, as Server-Sent Events or as chunked text;
- ``openapi``: the OpenAPI 3.1 document, generated from the route table and the
  proto descriptors;
- ``server``: the aiohttp application and its start and stop;
- ``static/``: the dashboard, a static page over the JSON API.
"""

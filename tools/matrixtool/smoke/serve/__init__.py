"""The serve check: the image started as its README tells users to serve it, probed from outside, stopped.

``check`` holds what a run showed and the judgement (pure); ``line`` the serve line and the containers' specs;
``run`` the step that starts the server of a profile run (``ServeRun``) and observes it; ``probing`` how a probe
reaches the server; ``health`` the image's own HEALTHCHECK; ``diagnosis`` and ``route_diagnosis`` the named causes
of a server that did not start, a route that failed, a stop that broke the contract.
"""

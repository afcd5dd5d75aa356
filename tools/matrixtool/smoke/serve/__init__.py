"""The serve check: the image started as its users must start it (its ENTRYPOINT, CMD and script read), probed from
outside, stopped.

``step`` is the check as a step of a container run (``ServeStep``: the tiny model's volume, shared by the profile
runs, and the form each image is started in; ``ServeRun``: one profile's server on a thread, judged); ``run`` starts
and observes that server (``observe``, a warm start on its compile cache); ``check`` holds what a run showed and the
judgement (pure); ``start`` how the image must be started (``choose``: the form its ENTRYPOINT, CMD and script call
for); ``line`` the serve line and the containers' specs; ``probing`` how a probe reaches the server; ``health`` the
image's own HEALTHCHECK; ``diagnosis`` and ``route_diagnosis`` the named causes of a server that did not start, a
route that failed, a stop that broke the contract.
"""

"""connmon's Kafka topics: one definition of each (``spec``), the pure comparison of that
definition with what a cluster has (``plan``), the admin-client edge (``admin``) and
``connmon topics create|check`` (``cli``).

The agent, the job and the exporter import ``admin.check_at_start`` to refuse to start on a
missing topic or one with the wrong ``cleanup.policy``.
"""

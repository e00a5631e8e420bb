"""What a user asks bertwatch to watch, and how: every option of the callbacks and of ``bertwatch run``.

``settings.WatchSettings`` holds the front options and five nested values (``groups.ProbeOptions``,
``AlertSettings``, ``VerdictSettings``, ``groups.AblationOptions``, ``groups.ExpertOptions``), each option declared
once with ``core.schema.option`` (default, help, flags, check).
The public names are importable from ``bertwatch`` and ``bertwatch.callbacks``.
"""

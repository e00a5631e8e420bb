"""What a user asks bertwatch to watch, and how: every option of the callbacks and of ``bertwatch run``.

``settings.WatchSettings`` holds the front options and five nested values (``groups.ProbeOptions``,
``AlertSettings``, ``VerdictSettings``, ``groups.AblationOptions``, ``groups.ExpertOptions``); ``checks`` declares an option (default,
help, flags, check) and checks its value. The public names are re-exported by ``bertwatch.callbacks``.
"""

"""The writer side of the plugin: what bertwatch writes into a run's event file and how.

``metadata`` names the plugin, its tags and kinds (what every reader, the plugin and the report, looks up);
``summary`` turns numpy values into summaries with the ``SummaryWriter``; ``event_file`` frames the records;
``tensors`` holds the conversions and checks every summary builder shares.
"""

"""The plugin's views, one folder each: a view's route bodies (Python) and its ES module (``view_<name>.js``) side
by side. The modules every view uses (``api.js``, ``dom.js``, ``charts.js``, ...) are in ``bertwatch/tb/static/``;
``bertwatch/tb/plugin.py`` serves every frontend file at ``/static/<file>`` wherever it lives.
"""

"""The live dashboard: the widget and its front end, figure data, charts, buttons, side panel,
compact view."""

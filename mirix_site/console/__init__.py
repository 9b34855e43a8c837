"""The operators' console: the admin's dashboard (``/admin/``) and the daily figures behind it.

Each app puts its own panels on the dashboard and its own daily series in the roll-up (from its
admin module: ``dashboard_register``, ``daily_series_register``); this kit draws them (server
-rendered SVG, no script, no CDN) and keeps the roll-up table. A page load reads the roll-up's
few rows and bounded counts, never a scan of a big table; the roll-up job (beat) does the
scanning, a day at a time.
"""

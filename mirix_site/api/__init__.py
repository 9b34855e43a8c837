"""The DRF kit every app's API uses (as HackSoft's ``api/`` and NetBox's ``netbox/api/``): API
key authentication, the tenant-scoped base view, the one error shape and the exception
handler that answers the domain's refusals, fields, keyset pagination, the JSON parser,
the schema, throttling, permissions and the middleware in front of them. It rests on
``accounts`` (keys, tenants, end users); each app's ``api`` package rests on it."""

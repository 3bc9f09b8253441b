"""akg.db: the tuning database (schema, migrations, queries, import/export)."""

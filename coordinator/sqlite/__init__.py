"""The embedded ``JobStore`` on one SQLite file: ``store`` (the store), ``schema`` (its
tables and statements), ``group_commit`` (the one writer thread and the read pool)."""

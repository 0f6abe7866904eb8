"""The run history in SQLite: schema (shared with the server), writer, feed, runs whose kernel
died, export."""

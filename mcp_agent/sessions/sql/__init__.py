"""What the SQL backends (SQLite, PostgreSQL) share: the parse cache, the reads of a session
and the repo's open/keep, listing and paging; each backend keeps its writes and dialect."""

"""Staging a language's data in its bucket, the work of `trainctl data push`: which local files go under which
keys (files.py), their checks, each file read a chunk at a time with its checksum taken on the way
(checks.py), and the push itself: conflicts told by checksum, backups, uploads (push.py). What a push says
goes through the PushListener its caller gives (report.py); the command only parses, calls and prints."""

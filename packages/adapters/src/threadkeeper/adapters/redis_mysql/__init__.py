"""The redis-mysql profile (blog design): adapters arrive with the redis-mysql profile."""

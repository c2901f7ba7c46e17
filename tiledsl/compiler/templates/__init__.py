"""The jinja2 template of a generated driver (driver.py.j2), read as package data."""

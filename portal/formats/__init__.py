"""Django's own date formats set to the portal's (``FORMAT_MODULE_PATH``): see ``en/formats.py``."""

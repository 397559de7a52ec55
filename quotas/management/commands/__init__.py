"""``manage.py`` commands of the quotas app: ``device_plugin_config``."""

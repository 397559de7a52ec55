"""What Django writes for a date or time it renders itself, as :mod:`core.formatting` writes them.

The admin console renders model fields with Django's locale formats ("Nov. 23, 2026, 2:05 p.m."):
list columns of plain date fields, every read-only field of a detail page, the sandbox's rows.
The portal writes ``2026-11-23 14:05 UTC`` (:func:`core.formatting.format_when`: the current
time zone and its abbreviation); these formats make Django write the same. Pages of the portal
use the ``when`` filter and are not affected.
"""

DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"

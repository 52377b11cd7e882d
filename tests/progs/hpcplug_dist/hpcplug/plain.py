"""plain: the counter again under another name, without a batch template of its own (hpcsuite's
generic template serves it)."""
from hpcplug import counter
from hpcsuite import deck as dk

NAME = "plain"
SUMMARY = "the counter without a template of its own"
SCHEMA = dk.Schema({**counter.SCHEMA.tables, "app": {"name": dk.Str(help="the application: plain")}})
check = counter.check
run = counter.run

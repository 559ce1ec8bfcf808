"""`textual run --dev tui/dev.py`: the app on $AUTORESEARCH_WORKSPACE (or the folder above), with
the devtools console. Same factory as the CLI and the tests."""

from kb.workspace import find_workspace
from tui.app import make_app

app = make_app(find_workspace().root)

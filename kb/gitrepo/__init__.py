"""The one package that talks to git (through gitpython): the workspace mirror, forks, worktrees.

Reading forks and making experiment worktrees are two uses of the same helper. gitpython is
imported lazily so the CLI's start-up path never pays for it. Bulk reads (thousands of commits)
should go through `run()` or `stream()` with a single batched command rather than one object
lookup per commit.

By concern: `plumbing` (repositories, one git command, worktrees, commits in the bare mirror),
`patches` (what a patch touches, apply checks, three-way merges, a tree's files) and `forks`
(remote refs, fetching, ancestry, batched reads). Every public name is re-exported here, and
callers use `from kb import gitrepo`.
"""

from kb.gitrepo.forks import checkout_head as checkout_head
from kb.gitrepo.forks import cherry as cherry
from kb.gitrepo.forks import commit_graph as commit_graph
from kb.gitrepo.forks import delete_ref as delete_ref
from kb.gitrepo.forks import fetch_branch as fetch_branch
from kb.gitrepo.forks import file_sets as file_sets
from kb.gitrepo.forks import is_ancestor as is_ancestor
from kb.gitrepo.forks import ls_remote as ls_remote
from kb.gitrepo.forks import merge_base as merge_base
from kb.gitrepo.forks import patch_ids as patch_ids
from kb.gitrepo.forks import patch_ids_of as patch_ids_of
from kb.gitrepo.forks import read_files as read_files
from kb.gitrepo.forks import stream as stream
from kb.gitrepo.forks import tree_blobs as tree_blobs
from kb.gitrepo.forks import unquote_path as unquote_path
from kb.gitrepo.forks import update_ref as update_ref
from kb.gitrepo.patches import ThreeWay as ThreeWay
from kb.gitrepo.patches import TreeChange as TreeChange
from kb.gitrepo.patches import apply_check as apply_check
from kb.gitrepo.patches import apply_check_many as apply_check_many
from kb.gitrepo.patches import diff_trees as diff_trees
from kb.gitrepo.patches import grep_count as grep_count
from kb.gitrepo.patches import list_files as list_files
from kb.gitrepo.patches import patch_names as patch_names
from kb.gitrepo.patches import show_file as show_file
from kb.gitrepo.patches import three_way as three_way
from kb.gitrepo.patches import tree_changes as tree_changes
from kb.gitrepo.patches import worktree_diff as worktree_diff
from kb.gitrepo.plumbing import AUTHOR_EMAIL as AUTHOR_EMAIL
from kb.gitrepo.plumbing import AUTHOR_NAME as AUTHOR_NAME
from kb.gitrepo.plumbing import branch_head as branch_head
from kb.gitrepo.plumbing import clone_mirror as clone_mirror
from kb.gitrepo.plumbing import commit_messages as commit_messages
from kb.gitrepo.plumbing import commit_of as commit_of
from kb.gitrepo.plumbing import commit_patch as commit_patch
from kb.gitrepo.plumbing import format_patch as format_patch
from kb.gitrepo.plumbing import has_commit as has_commit
from kb.gitrepo.plumbing import identity_env as identity_env
from kb.gitrepo.plumbing import is_url as is_url
from kb.gitrepo.plumbing import open_repo as open_repo
from kb.gitrepo.plumbing import parse_trailers as parse_trailers
from kb.gitrepo.plumbing import resolve as resolve
from kb.gitrepo.plumbing import run as run
from kb.gitrepo.plumbing import run_unchecked as run_unchecked
from kb.gitrepo.plumbing import set_branch as set_branch
from kb.gitrepo.plumbing import worktree_add as worktree_add
from kb.gitrepo.plumbing import worktree_changes as worktree_changes
from kb.gitrepo.plumbing import worktree_remove as worktree_remove

"""``shardcron completion bash|zsh|fish``: the script that completes shardcron's commands
and options in that shell.

The script calls back into ``shardcron`` (click's completion protocol, through the
``_SHARDCRON_COMPLETE`` variable), so it completes whatever commands this version has.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash:  shardcron completion bash > ~/.local/share/bash-completion/completions/shardcron
    zsh:   shardcron completion zsh > "${fpath[1]}/_shardcron"
    fish:  shardcron completion fish > ~/.config/fish/completions/shardcron.fish
    """
    root = ctx.find_root()
    script = get_completion_class(shell)
    assert script is not None  # every name in SHELLS has one
    prog = root.info_name or "shardcron"
    click.echo(script(root.command, {}, prog, "_SHARDCRON_COMPLETE").source())

"""Colour for IR dumps printed on a terminal (rich), used by `npucc ir`."""

from __future__ import annotations

from rich.console import Console
from rich.highlighter import RegexHighlighter
from rich.theme import Theme


class IrHighlighter(RegexHighlighter):
    """Highlights names, node ids, buffers, operands, pipes and numbers of every IR level."""

    base_style = "ir."
    highlights = [
        r"(?P<string>\"(?:[^\"\\]|\\.)*\")",
        r"(?P<node>%\d+)",
        r"(?P<buffer>\bb\d+\b)",
        r"(?P<operand>\b(?:L1|UB|L0A|L0B|L0C|DDR)\[[^\]]*\])",
        r"(?P<pipe>\b(?:MTE1|MTE2|MTE3|CUBE|VECTOR|FIXP)\b)",
        r"(?P<keyword>^\s*(?:graph|input|output|const|ddr|alias|core|buffer|schedule|offset|"
        r"spill|tensor|target|image|end|alloc|free|barrier|tiled-program|scheduled-program|"
        r"npucc-stream)\b)",
    ]


THEME = Theme(
    {
        "ir.string": "green",
        "ir.node": "bold cyan",
        "ir.buffer": "magenta",
        "ir.operand": "yellow",
        "ir.pipe": "bold blue",
        "ir.keyword": "bold",
    }
)


def print_highlighted(text: str) -> None:
    """Print IR text on stdout with colours."""
    console = Console(highlighter=IrHighlighter(), theme=THEME, soft_wrap=True)
    console.print(text, end="", markup=False)

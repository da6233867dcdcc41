"""The conclusions that chapters render as text (Markdown), built from their numbers.

A chapter's conclusion is a sentence of the page, not a printout: a cell returns
``IPython.display.Markdown(text)`` with a text from here, so it wraps with the column like the
prose around it. Each function takes the numbers the chapter measured and says what they show,
including when they do not show what the chapter set out to show.
"""

from __future__ import annotations

from .figure_checks import plural


def signed(value: float, digits: int = 3) -> str:
    """``value`` with its sign and ``digits`` decimals, the minus as the typographic one (−0.045)."""
    return f"{value:+.{digits}f}".replace("-", "\u2212")


def live_run(first_below: int | None, train_steps: int, model_end: float, lloyd_end: float, steps: int,
             book_steps: int | None = None) -> str:
    """What the live training run shows: whether its layer beat one Lloyd step during training
    (``first_below``: the first evaluated training step where its objective after one step fell below
    one Lloyd step's, None if never) and where it ends against Lloyd after ``steps`` clustering steps
    (``model_end``, ``lloyd_end``: average log-objectives). When the run shows neither, the text says
    that it is too short to show the paper's claim, and names the book profile's ``book_steps``."""
    below = lloyd_end - model_end  # > 0: the layer ends below Lloyd
    crossed = (f"beats one Lloyd step from training step {grouped(first_below)} on" if first_below is not None
               else f"never beats one Lloyd step in its {grouped(train_steps)} training steps")
    end = (f"ends **{below:.3f} below** Lloyd's" if below > 0 else f"ends **{-below:.3f} above** Lloyd's")
    text = (f"The live layer {crossed}, and after {plural(steps, 'clustering step')} its average "
            f"log-objective ({model_end:.3f}) {end} ({lloyd_end:.3f}).")
    if first_below is not None and below > 0:
        return text + " At this small size it shows the paper's claim: a trained layer iterated with re-embedding " \
                      "ends below Lloyd's algorithm."
    book = f"; the book profile's run, {grouped(book_steps)} training steps, shows it" if book_steps else ""
    return text + f" This run is too short to show the paper's claim (a trained layer that ends below Lloyd){book}."


def dropout(effect_mean: float, low: float, high: float, repeats: int, steps: int) -> str:
    """The effect of attention dropout at evaluation on a median after ``steps`` steps: its mean over
    ``repeats`` dropout seeds and their range."""
    return (f"Leaving dropout on moves the median after {plural(steps, 'step')} by {signed(effect_mean)} on average "
            f"over {plural(repeats, 'dropout seed')} (from {signed(low)} to {signed(high)}).")


def grouped(count: int) -> str:
    """A whole number as the book's prose writes it: digits in groups of three from 10 000 on, separated
    by a no-break space, as the book's prose writes them ("3 000 steps", "10 000 steps"): ``grouped(1550)`` is
    "1 550", ``grouped(500)`` "500"."""
    return f"{count:,}".replace(",", "\u00a0")

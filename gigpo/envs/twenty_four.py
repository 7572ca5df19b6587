"""24-points (the GiGPO paper's EZPoints, as text): combine four cards with + - * / to make 24.

Description
    Each step the agent writes an arithmetic expression over two or more of the remaining numbers,
    each used at most once; its exact value (fractions kept exact) replaces them. With four cards the
    agent can go step by step (``8 - 4``, then ``4 * 6`` ...) or answer at once (``(8 - 4) * (7 - 1)``).
    Expressions are parsed with `ast` and evaluated by walking the tree: never `eval`.
Observation
    ``Numbers: 1 4 6 8``, sorted; a negative or fractional number shows as ``(-5)`` or ``(8/3)`` and
    is written the same way in an expression.
Actions
    Free text: an expression with integer literals, ``+ - * /`` and parentheses.
Reward
    `win_reward` when the last number equals the target; 0 otherwise; invalid expressions cost
    `invalid_action_penalty` and change nothing.
Episode end
    Terminated when one number is left. Cards are redrawn until the hand is solvable (`solvable_only`).
Version history
    v0: first version.
"""
from __future__ import annotations

import ast
import operator
from collections import Counter
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Optional

from gigpo.envs.base import INVALID_ACTION_PENALTY, AgentEnv

MAX_EXPRESSION_CHARS = 200
_OPS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class ExpressionError(ValueError):
    """An expression the agent may not play; the message says why."""


def show(number: Fraction) -> str:
    """How a number is displayed and written: `8`, `(-5)`, `(8/3)`."""
    if number.denominator == 1 and number >= 0:
        return str(number.numerator)
    return f"({number.numerator}/{number.denominator})" if number.denominator != 1 else f"({number.numerator})"


def evaluate(expression: str, numbers: list[Fraction]) -> tuple[Fraction, list[Fraction]]:
    """Value of `expression` and the numbers it used; ExpressionError if it is not a legal play."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    names: dict[str, Fraction] = {}
    for number in sorted(set(numbers), key=lambda n: -len(show(n))):
        if show(number).startswith("("):  # write (8/3) as one number, not as 8 divided by 3
            names[f"_n{len(names)}"] = number
            expression = expression.replace(show(number), f" _n{len(names) - 1} ")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ExpressionError("not an arithmetic expression") from None
    used: list[Fraction] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ExpressionError("division by zero")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(Fraction(node.value))
            return Fraction(node.value)
        if isinstance(node, ast.Name) and node.id in names:
            used.append(names[node.id])
            return names[node.id]
        if isinstance(node, ast.UnaryOp):
            raise ExpressionError("no unary minus: write a negative number as it is shown, e.g. (-5)")
        raise ExpressionError("only integers, + - * / and parentheses are allowed")

    value = walk(tree.body)
    missing = Counter(used) - Counter(numbers)
    if missing:
        raise ExpressionError(f"not among the remaining numbers: {', '.join(show(n) for n in missing.elements())} "
                              f"(each number can be used once)")
    if len(used) < 2:
        raise ExpressionError("combine at least two of the numbers")
    return value, used


@lru_cache(maxsize=65536)
def _solution_step(numbers: tuple[Fraction, ...], target: Fraction) -> Optional[str]:
    """A binary step `a op b` from which `target` is still reachable, or None. `numbers` is sorted."""
    if len(numbers) == 1:
        return "" if numbers[0] == target else None
    for i in range(len(numbers)):
        for j in range(len(numbers)):
            if i == j:
                continue
            a, b = numbers[i], numbers[j]
            rest = [n for k, n in enumerate(numbers) if k not in (i, j)]
            for op, fn in _OPS.items():
                if (op in (ast.Add, ast.Mult) and i > j) or (op is ast.Div and b == 0):
                    continue
                if _solution_step(tuple(sorted(rest + [fn(a, b)])), target) is not None:
                    return f"{show(a)} {_SYMBOLS[op]} {show(b)}"
    return None


class TwentyFourEnv(AgentEnv):
    """24-points with verified exact arithmetic and a search-based expert (see the module docstring)."""

    def __init__(self, num_cards: int = 4, max_card: int = 13, target: int = 24, win_reward: float = 10.0,
                 solvable_only: bool = True, invalid_action_penalty: float = INVALID_ACTION_PENALTY,
                 render_mode: Optional[str] = None) -> None:
        super().__init__(invalid_action_penalty, render_mode)
        if not 2 <= num_cards <= 6:
            raise ValueError(f"num_cards={num_cards} must be between 2 and 6")
        if max_card < 1:
            raise ValueError(f"max_card={max_card} must be at least 1")
        self.num_cards, self.max_card, self.target = num_cards, max_card, Fraction(target)
        self.win_reward, self.solvable_only = float(win_reward), solvable_only
        self.task = (f"Make {target} from the numbers with + - * / and parentheses. Each step, write an expression "
                     f"using two or more remaining numbers, each once; its value replaces them. "
                     f"The game ends when one number is left.")
        self.numbers: list[Fraction] = []

    def _observe(self) -> str:
        return "Numbers: " + " ".join(show(n) for n in self.numbers)

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        for _ in range(1000):
            cards = self.np_random.integers(1, self.max_card + 1, size=self.num_cards)
            self.numbers = sorted(Fraction(int(c)) for c in cards)
            if not self.solvable_only or self.expert_action() is not None:
                return self._observe(), {}
        raise RuntimeError(f"no solvable hand of {self.num_cards} cards up to {self.max_card} for target "
                           f"{self.target} in 1000 draws; set solvable_only=False or change the cards")

    def parse_action(self, text: str) -> tuple[Optional[str], str]:
        expression, reason = super().parse_action(text)
        if expression is None:
            return None, reason
        try:
            evaluate(expression, self.numbers)
        except ExpressionError as exc:
            return None, str(exc)
        return expression, ""

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        value, used = evaluate(action, self.numbers)
        remaining = Counter(self.numbers) - Counter(used)
        self.numbers = sorted(list(remaining.elements()) + [value])
        done = len(self.numbers) == 1
        self._won = done and self.numbers[0] == self.target
        return self._observe(), self.win_reward if self._won else 0.0, done, {}

    def expert_action(self) -> Optional[str]:
        """One binary step that keeps the target reachable, or None if it no longer is."""
        step = _solution_step(tuple(self.numbers), self.target)
        return step or None

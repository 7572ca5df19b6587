"""What an ALFWorld agent has observed so far, kept from the game's text alone, for the memory prompt.

alfworld's hand-coded expert does not know where things are: it remembers the room's receptacles in
the order the first observation lists them, which it has checked and what it saw in each. A prompt
that shows only the last step or two hides that memory from a policy that learns from the expert.
`ObservedMemory` keeps the same memory, built only from the texts the agent reads (the first
observation and the feedback of each of its own actions), never from the engine's facts or the
expert's internals, so an object in a receptacle the agent has not looked into never appears in it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

_ROOM = re.compile(r"Looking quickly around you, you see (.+?)\.\s*$", re.S)
_ARRIVE = re.compile(r"You arrive at (.+?)\.")
_ON = re.compile(r"On the (.+?), you see (.+?)\.")
_IN = re.compile(r"The (.+?) is open\. In it, you see (.+?)\.")
_CLOSED = re.compile(r"The (.+?) is closed\.")
_OPENED = re.compile(r"You open the (.+?)\.")
_SHUT = re.compile(r"You close the (.+?)\.")
_TAKE = re.compile(r"You pick up the (.+?)(?: from the (.+?))?\.")
_PUT = re.compile(r"You (?:move|put) the (.+?) (?:to|in|on|into|onto) the (.+?)\.")
_CHANGE = re.compile(r"You (heat|cool|clean) the (.+?) using the (.+?)\.")
_STATE_WORD = {"heat": "hot", "cool": "cool", "clean": "clean"}
MIDDLE = "the middle of the room"


def parse_items(text: str) -> list[str]:
    """"a cd 2, and a pencil 1" -> ["cd 2", "pencil 1"]; "nothing" -> []."""
    text = text.strip()
    if text == "nothing":
        return []
    items = []
    for part in text.split(","):
        part = part.strip()
        part = part[len("and "):] if part.startswith("and ") else part
        for article in ("a ", "an ", "some "):
            if part.startswith(article):
                part = part[len(article):]
                break
        if part:
            items.append(part)
    return items


@dataclass
class ObservedMemory:
    """The room's receptacles, where the agent has been, what it saw there and what it holds.

    `seen[r]` is None for a receptacle the agent stood at but found closed and did not open, else the
    objects it last saw in or on it (updated by its own takes and puts). Receptacles are in the room's
    order (the first observation's list).
    """

    receptacles: list[str] = field(default_factory=list)
    visited: list[str] = field(default_factory=list)
    seen: dict[str, Optional[list[str]]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    location: str = MIDDLE
    holding: list[str] = field(default_factory=list)
    states: dict[str, list[str]] = field(default_factory=dict)
    """Held objects' states the agent caused (e.g. "hot" after heating)."""

    @classmethod
    def start(cls, first_observation: str) -> "ObservedMemory":
        """From the room description of the first observation (task line already removed)."""
        match = _ROOM.search(first_observation)
        return cls(receptacles=parse_items(match.group(1)) if match else [])

    def update(self, action: str, feedback: str) -> None:
        """Record what an admissible action's feedback says (an invalid action changes nothing)."""
        arrived = _ARRIVE.search(feedback)
        if arrived:
            self.location = arrived.group(1)
            if self.location not in self.visited:
                self.visited.append(self.location)
            self.seen.setdefault(self.location, None)
        for pattern in (_ON, _IN):
            for recep, items in pattern.findall(feedback):
                if recep == self.location:  # "examine X" of an object also says "On the ...": keep receptacles only
                    self.seen[recep] = parse_items(items)
        for recep in _CLOSED.findall(feedback):
            self.closed.add(recep)
        for recep in _OPENED.findall(feedback):
            self.closed.discard(recep)
        for recep in _SHUT.findall(feedback):
            self.closed.add(recep)
        taken = _TAKE.search(feedback)
        if taken:
            obj, recep = taken.groups()
            self.holding.append(obj)
            if recep and self.seen.get(recep) and obj in self.seen[recep]:  # type: ignore[operator]
                self.seen[recep].remove(obj)  # type: ignore[union-attr]
        put = _PUT.search(feedback)
        if put:
            obj, recep = put.groups()
            if obj in self.holding:
                self.holding.remove(obj)
            self.seen[recep] = (self.seen.get(recep) or []) + [obj]
            self.states.pop(obj, None)
        changed = _CHANGE.search(feedback)
        if changed:
            verb, obj, _ = changed.groups()
            self.states.setdefault(obj, []).append(_STATE_WORD[verb])

    @property
    def unvisited(self) -> list[str]:
        return [r for r in self.receptacles if r not in self.visited]

    def render(self) -> str:
        """The memory as prompt lines, each ending in a newline."""
        lines = [f"Not visited yet: {', '.join(self.unvisited) or 'none'}."]
        if self.visited:
            lines.append("Seen so far:")
            for recep in self.visited:
                items = self.seen.get(recep)
                if items is None:
                    what = "closed, not looked inside"
                else:
                    what = ", ".join(items) or "nothing"
                lines.append(f"- {recep}: {what}")
        held = ", ".join(f"{o} ({' and '.join(self.states[o])})" if o in self.states else o for o in self.holding)
        lines.append(f"You are at {self.location}, holding {held or 'nothing'}.")
        return "\n".join(lines) + "\n"

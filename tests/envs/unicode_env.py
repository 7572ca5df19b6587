"""Envs whose text is not ASCII, for the Unicode tests; importing this module registers them.

`unicode/Cafe-v0`: order a drink from a French menu ("café crème", "thé vert 🍵"), then confirm it.
`unicode/NotText-v0`: an env whose observation is a number, which `gigpo envs check` must reject in one line.
"""
from __future__ import annotations

from typing import Any, Optional

from gigpo.envs import AgentEnv, register_env

DRINKS = ("café crème", "thé vert 🍵", "chocolat chaud", "日本茶")


class CafeEnv(AgentEnv):
    task = "Commandez la boisson du jour au café « Chez Zoé »."

    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        self.wanted = DRINKS[int(self.np_random.integers(len(DRINKS)))]
        self.ordered: Optional[str] = None
        return f"Boisson du jour : {self.wanted}. Menu : {', '.join(DRINKS)}.", {}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.ordered is None:
            self.ordered = action
            return f"Vous avez choisi {action} — confirmez-vous ?", 0.0, False, {}
        self._won = action == "oui" and self.ordered == self.wanted
        return f"Merci ! Voici votre {self.ordered} ☕", 10.0 if self._won else 0.0, True, {}

    def admissible_actions(self) -> list[str]:
        return list(DRINKS) if self.ordered is None else ["oui", "non"]

    def expert_action(self) -> str:
        return self.wanted if self.ordered is None else "oui"


class NotTextEnv(CafeEnv):
    def _reset(self, options: Optional[dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
        super()._reset(options)
        return 42, {}


register_env("unicode/Cafe-v0", CafeEnv)
register_env("unicode/NotText-v0", NotTextEnv)

"""Recipes: ready-made workspace set-ups for known targets (`autoresearch init --recipe NAME`)."""

from __future__ import annotations

RECIPES = ("llama.cpp",)

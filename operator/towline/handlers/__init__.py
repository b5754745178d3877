"""Thin kopf handlers: gather observations, call the engine, carry out actions, write status once."""

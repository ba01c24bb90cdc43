"""Ops: masked reductions and broadcasting explained."""

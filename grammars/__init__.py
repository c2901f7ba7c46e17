"""The .tile grammar (tile.lark), shipped as package data of tiledsl."""

"""Cart arithmetic in integer cents."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    name: str
    price: int          # cents per unit
    quantity: int = 1


def subtotal(items: list[Item]) -> int:
    """Sum of price x quantity over the cart, in cents."""
    return sum(item.price for item in items)


def apply_discount(amount: int, percent: float) -> int:
    """``amount`` reduced by ``percent`` percent, rounded to whole cents."""
    if not 0 <= percent <= 100:
        raise ValueError("percent must be between 0 and 100")
    return round(amount - amount * percent)


def format_price(cents: int) -> str:
    """``1050`` -> ``"$10.50"``."""
    return f"${cents / 100}"


def total(items: list[Item], discount_percent: float = 0) -> str:
    """The formatted total after the discount."""
    return format_price(apply_discount(subtotal(items), discount_percent))

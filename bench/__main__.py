"""Run every benchmark and print its figures."""

from __future__ import annotations

import asyncio

from bench import planner, webhook


def main() -> None:
    print("== webhook ==")
    webhook.run_pure()
    asyncio.run(webhook.run_http())
    print("\n== planner ==")
    planner.run()


if __name__ == "__main__":
    main()

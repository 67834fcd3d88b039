"""The mutating admission webhook: pure `review` and the aiohttp `server` around it."""

"""Control of calls: output checks, model downgrade and human approvals."""

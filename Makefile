# Shortcuts; the scripts are the real entry points (they bootstrap .venv themselves).
.PHONY: demo test lint bench clean
demo:
	scripts/demo.sh
test:
	scripts/test.sh
lint:
	scripts/bootstrap.sh && .venv/bin/ruff check provisioner tests bench && .venv/bin/mypy provisioner
bench:
	scripts/bootstrap.sh && .venv/bin/python bench/inventory_scale.py
clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache

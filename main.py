from app.gui.app import run
run()

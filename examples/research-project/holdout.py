"""The holdout evaluation: loopx runs it only when a human asks to promote; the agent never sees it."""

from knn import accuracy

print(f"val_acc: {accuracy('config.json', 'data/train.csv', 'data/holdout.csv'):.4f}")

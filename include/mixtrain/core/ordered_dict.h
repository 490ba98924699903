#pragma once
// OrderedDict: named values in insertion order, as libtorch's torch::OrderedDict that
// Module::named_parameters() returns. Its items are pairs, so code that reads .first / .second or
// binds `auto& [name, tensor]` keeps working, and have libtorch's .key() / .value(). It is a
// std::vector of its items (index, iterate, push_back) with the dict's lookups added, and converts
// to std::vector<std::pair<Key, Value>> where one is expected (io::NamedTensors).
#include <initializer_list>
#include <utility>
#include <vector>

#include "mixtrain/base/error.h"

namespace mixtrain {

template <class Key, class Value>
class OrderedDictItem : public std::pair<Key, Value> {
 public:
  using std::pair<Key, Value>::pair;
  OrderedDictItem(std::pair<Key, Value> p) : std::pair<Key, Value>(std::move(p)) {}  // NOLINT

  const Key& key() const { return this->first; }
  Value& value() { return this->second; }
  const Value& value() const { return this->second; }
  Value& operator*() { return this->second; }
  const Value& operator*() const { return this->second; }
  Value* operator->() { return &this->second; }
  const Value* operator->() const { return &this->second; }
  const std::pair<Key, Value>& pair() const { return *this; }
};

template <class Key, class Value>
class OrderedDict : public std::vector<OrderedDictItem<Key, Value>> {
 public:
  using Item = OrderedDictItem<Key, Value>;
  using Base = std::vector<Item>;
  using Base::Base;
  using Base::operator[];
  OrderedDict() = default;
  OrderedDict(std::vector<std::pair<Key, Value>> items) {  // NOLINT: from the pairs it replaces
    this->reserve(items.size());
    for (auto& p : items) this->emplace_back(std::move(p));
  }

  // The value of `key`; an Error naming the key when there is none.
  Value& operator[](const Key& key) {
    Value* v = find(key);
    MT_CHECK(v != nullptr, "OrderedDict: no key '", key, "'");
    return *v;
  }
  const Value& operator[](const Key& key) const { return const_cast<OrderedDict&>(*this)[key]; }
  // nullptr when there is no such key.
  Value* find(const Key& key) {
    for (Item& item : *this)
      if (item.first == key) return &item.second;
    return nullptr;
  }
  const Value* find(const Key& key) const { return const_cast<OrderedDict&>(*this).find(key); }
  bool contains(const Key& key) const { return find(key) != nullptr; }
  bool is_empty() const { return this->empty(); }
  // Appends; an Error if the key is already there.
  Value& insert(Key key, Value value) {
    MT_CHECK(!contains(key), "OrderedDict: key '", key, "' already defined");
    this->emplace_back(std::move(key), std::move(value));
    return this->back().second;
  }
  std::vector<Key> keys() const {
    std::vector<Key> out;
    for (const Item& item : *this) out.push_back(item.first);
    return out;
  }
  std::vector<Value> values() const {
    std::vector<Value> out;
    for (const Item& item : *this) out.push_back(item.second);
    return out;
  }
  const Base& items() const { return *this; }

  operator std::vector<std::pair<Key, Value>>() const {  // NOLINT: pass where the pairs are expected
    return std::vector<std::pair<Key, Value>>(this->begin(), this->end());
  }
};

}  // namespace mixtrain
